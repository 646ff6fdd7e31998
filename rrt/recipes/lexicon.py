"""Food lexicons behind the dietary tagger: what each food category is, and what it is not.

Each category lists its terms (plurals in -s/-es are implied; other plurals are listed),
exceptions (longer phrases that contain a term but are not that food, e.g. "coconut
milk" for dairy), tools (the few kitchen things named after a food that the classes below
miss, "fish slice", spelled out with their plurals), neutralising
modifiers that may stand up to three words before a term in the same clause ("vegan
butter", "dairy-free cream cheese"), adjacent modifiers that neutralise only right before
a term ("soy milk", "tofu bacon"), and dish terms that count only on ingredient lines (a
store-bought "pesto" hides cheese and nuts; a title "Sunflower Pesto" names what the
recipe makes from its own ingredients).
"""
from __future__ import annotations

from dataclasses import dataclass, field

CONSTRAINTS = ("dairy-free", "nut-free", "egg-free", "vegan", "vegetarian", "alcohol-free", "fish-free")


@dataclass(frozen=True)
class Category:
    """One kind of food that some constraint forbids."""

    name: str
    terms: tuple[str, ...]
    exceptions: tuple[str, ...] = ()
    modifiers: tuple[str, ...] = ()
    adjacent: tuple[str, ...] = ()
    dish_terms: tuple[str, ...] = field(default=())
    tools: tuple[str, ...] = ()


# Words that, shortly before a term, say the food is a plant-based stand-in.
PLANT_MODIFIERS = ("vegan", "plant-based", "plant based", "imitation", "faux", "mock")
MEATLESS_MODIFIERS = PLANT_MODIFIERS + ("vegetarian", "veggie", "meatless", "meat-free", "meat free")
# Words after a term that say it is absent or replaced ("egg-free", "butter substitute").
SUFFIX_NEUTRALISERS = ("free", "style", "like", "flavored", "flavoured", "substitute", "substitutes", "replacer", "replacers", "alternative",
                       "alternatives", "replacement")
# Words hyphened on after a term that make it a shape, size or colour ("egg-shaped",
# "walnut-sized", "honey-colored"), not the food itself.
LIKENESS_SUFFIXES = ("shaped", "shape", "sized", "size", "colored", "coloured", "color", "colour", "toned")
# The same after a space ("walnut sized balls"); a bare "shape" or "size" only ends a clause
# ("into a fish shape."): before more words it may be the verb, and "cheese shapes" is cheese.
LIKENESS_WORDS = ("sized", "shaped")

# Kitchen things named after a food, as classes rather than phrases: a singular food word right
# before one of these nouns (or hyphened to it) names the thing, so "egg beater", "walnut
# grinder" and "butter paper" need no phrase of their own, while "Grate the cheese with a
# grater" still names cheese. Left out on purpose: nouns a step also uses as verbs right after
# a food ("whisk", "press", "spoon", "brush"), and nouns whose pair is a food or holds one
# ("board", "platter", "cup", "ring", "slice", "cracker", "bowl", "jar", "bottle", "fryer",
# "roaster": a cheese board, egg slices, cheese crackers and a chicken fryer are food).
UTENSILS = ("grater", "knife", "knives", "slicer", "beater", "cutter", "spreader", "curler", "paddle",
            "plane", "wire", "frother", "whipper", "separator", "poacher", "timer", "thermometer", "mallet",
            "pick", "shucker", "scaler", "cleaver", "grinder", "chopper", "turner", "spatula", "kettle",
            "tweezers", "baster", "tenderizer", "tenderiser", "pounder", "hammer", "tongs", "opener",
            "glass", "dipper", "maker", "machine", "fork", "churn")
# Papers, cloths and cartons named after what they wrap or hold ("butter paper", "cheese cloth").
WRAPPINGS = ("paper", "cloth", "muslin", "parchment", "carton")
# Moulds and tins named after the shape they give ("fish mould", "lamb pan").
MOULDS = ("mould", "mold", "tin", "pan")
# Foods whose mould or tin is the food itself: a jello mould is the dish set in it, a sardine
# tin holds sardines.
FILLED_MOULDS = ("gelatin", "gelatine", "jello", "jell-o", "aspic", "salmon", "tuna", "sardine", "anchovy",
                 "crab", "shrimp")
# Words right after such a noun that give it back to the food ("chicken pan juices", "salmon
# pan seared", "cheese paper thin").
KITCHEN_NOT_BEFORE = ("juice", "juices", "drippings", "sauce", "gravy", "fried", "seared", "roasted", "thin",
                      "tender")

# Words before a food that make it the measure of a size or shape ("the size of a walnut", "as
# big as an egg"); at most two words may stand between, none of them a determiner or a
# conjunction, since "the size of the shrimp" and "the size of a walnut and the walnuts" name food.
SIZE_COMPARISONS = ("size of", "shape of", "as big as", "as large as", "as small as", "as thick as",
                    "bigger than", "larger than", "smaller than", "thicker than")
NOT_A_MEASURE = ("the", "this", "that", "these", "those", "your", "my", "our", "their", "its", "his",
                 "her", "each", "every", "all", "some", "any", "and", "or", "plus", "with", "then")

DAIRY = Category(
    "dairy",
    terms=(
        "milk", "whole milk", "skim milk", "buttermilk", "butter", "unsalted butter", "salted butter",
        "ghee", "cream", "heavy cream", "whipping cream", "heavy whipping cream", "whipped cream",
        "light cream", "double cream", "single cream", "sour cream", "ice cream", "half-and-half",
        "half and half", "creme fraiche", "crème fraîche", "cheese", "cream cheese", "cheddar",
        "mozzarella", "parmesan", "parmigiano", "parmigiano-reggiano", "pecorino", "romano", "ricotta",
        "mascarpone", "feta", "gouda", "brie", "camembert", "gruyere", "gruyère", "provolone",
        "monterey jack", "pepper jack", "colby", "emmental", "emmentaler", "fontina", "halloumi",
        "paneer", "goat cheese", "blue cheese", "gorgonzola", "roquefort", "stilton", "manchego",
        "asiago", "burrata", "queso", "queso fresco", "cotija", "quark", "cottage cheese", "yogurt",
        "yoghurt", "greek yogurt", "kefir", "whey", "casein", "curd", "curds", "gelato",
        "condensed milk", "evaporated milk", "milk powder", "powdered milk", "dulce de leche",
        "milk chocolate", "white chocolate", "butterscotch", "labneh", "skyr", "tzatziki", "raita",
        "lassi", "custard", "bechamel", "béchamel", "alfredo", "irish cream", "eggnog",
        "lactose", "dairy", "cheesecake", "buttercream", "brown butter", "goat milk", "goat's milk",
        "sheep's milk", "cow's milk", "caesar dressing", "ranch dressing", "hollandaise",
    ),
    exceptions=(
        "coconut milk", "coconut cream", "cream of coconut", "coconut yogurt", "coconut butter",
        "oat milk", "oat cream", "soy milk", "soymilk", "soya milk", "almond milk", "rice milk",
        "cashew milk", "hemp milk", "flax milk", "pea milk", "nut milk", "macadamia milk",
        "hazelnut milk", "plant milk", "non-dairy milk", "nondairy milk", "cashew cream",
        "cashew cheese", "nut cheese", "cream of tartar", "peanut butter", "almond butter",
        "cashew butter", "nut butter", "seed butter", "sunflower seed butter", "sunflower butter",
        "soy butter", "apple butter", "pumpkin butter", "cocoa butter", "cacao butter",
        "shea butter", "butter beans", "butter bean", "butter lettuce", "butter squash",
        "coconut ice cream", "cheesecloth", "head cheese", "milk thistle",
        "cream of wheat", "soy yogurt", "almond yogurt", "oat yogurt", "coconut whipped cream",
        "bean curd", "lemon curd", "lime curd", "dairy case", "cream soda",
        # The verb: "Cream the butter and sugar", "cream together" (the butter that follows still counts).
        "cream the", "cream together",
    ),
    modifiers=PLANT_MODIFIERS + ("dairy-free", "dairy free", "non-dairy", "nondairy", "non dairy"),
    adjacent=("coconut", "oat", "almond", "cashew", "nut", "rice", "hemp", "flax", "soy", "soya",
              "pea", "macadamia", "hazelnut", "sunflower", "cocoa", "cacao", "seed"),
    dish_terms=("ice cream", "custard", "bechamel", "béchamel", "alfredo", "tzatziki", "raita", "lassi", "cheesecake",
                "buttercream", "eggnog", "caesar dressing", "ranch dressing", "hollandaise",
                "butterscotch"),
    tools=("ice cream scoop", "ice cream scoops"),
)

NUTS = Category(
    "nuts",
    terms=(
        "nut", "nuts", "peanut", "peanut butter", "peanut oil", "almond", "almond milk", "almond flour",
        "almond meal", "almond butter", "almond extract", "walnut", "pecan", "cashew", "pistachio",
        "hazelnut", "filbert", "macadamia", "pine nut", "pinenut", "pignoli", "brazil nut", "chestnut",
        "praline", "marzipan", "frangipane", "nougat", "gianduja", "nutella", "amaretto", "frangelico",
        "pesto", "nut butter", "nut milk", "mixed nuts", "groundnut", "satay", "baklava",
        "macaron", "orgeat",
    ),
    exceptions=("water chestnut", "butternut", "nutmeg", "coconut", "doughnut", "donut",
                "nutritional yeast", "nut-free", "nut free", "tiger nut", "nut brown"),
    modifiers=("nut-free", "nut free", "peanut-free", "peanut free", "tree nut-free"),
    adjacent=("sunflower", "seed", "soy", "coconut"),
    dish_terms=("pesto", "satay", "baklava", "praline", "nougat", "macaron"),
    tools=("nut cracker", "nut crackers", "nut milk bag", "nut milk bags"),
)

EGG = Category(
    "egg",
    terms=(
        "egg", "eggs", "egg yolk", "egg white", "yolk", "egg wash", "hard-boiled egg", "boiled egg",
        "meringue", "mayonnaise", "mayo", "aioli", "custard", "hollandaise", "bearnaise", "béarnaise",
        "eggnog", "frittata", "quiche", "omelet", "omelette", "ladyfinger", "ladyfingers", "brioche",
        "challah", "albumen", "egg noodles", "fresh pasta", "fresh fettuccine", "fresh tagliatelle",
        "fresh linguine", "fresh pappardelle", "fresh ravioli", "egg pasta", "caesar dressing", "souffle", "soufflé", "carbonara",
    ),
    exceptions=("eggplant", "egg replacer", "egg-free", "egg free", "eggless", "flax egg", "chia egg",
                "egg roll wrapper substitute", "vegan mayo", "vegan mayonnaise"),
    modifiers=PLANT_MODIFIERS + ("egg-free", "egg free", "eggless"),
    adjacent=("flax", "flaxseed", "chia", "aquafaba", "chickpea"),
    dish_terms=("meringue", "custard", "hollandaise", "bearnaise", "béarnaise", "eggnog", "frittata",
                "quiche", "omelet", "omelette", "souffle", "soufflé", "carbonara", "caesar dressing",
                "aioli", "brioche", "challah"),
)

MEAT = Category(
    "meat",
    terms=(
        "meat", "beef", "ground beef", "corned beef", "pork", "chicken", "turkey", "lamb", "mutton",
        "veal", "venison", "bison", "goat", "rabbit", "duck", "goose", "quail", "pheasant", "boar",
        "elk", "ham", "bacon", "pancetta", "prosciutto", "salami", "pepperoni", "chorizo", "sausage",
        "bratwurst", "kielbasa", "hot dog", "frankfurter", "meatball", "meatloaf", "steak", "brisket",
        "short rib", "spare rib", "spareribs", "baby back ribs", "sirloin", "tenderloin", "pork chop",
        "liver", "kidney", "tripe", "sweetbreads", "tongue", "oxtail", "bone marrow", "giblets",
        "foie gras", "gizzard", "chitterlings", "lard", "suet", "tallow", "schmaltz", "bone broth",
        "chicken broth", "chicken stock", "beef broth", "beef stock", "chicken bouillon",
        "beef bouillon", "pork belly", "guanciale", "lardons", "andouille", "mortadella",
        "capicola", "bresaola", "pastrami", "jerky", "carnitas", "poultry", "drippings",
        "chicken fat", "bacon fat", "bacon grease", "pâté", "veal stock", "ground turkey",
        "ground pork", "ground lamb", "hamburger", "burger patty", "nduja", "speck ham",
    ),
    exceptions=("beefsteak tomato", "beefsteak tomatoes", "beefsteak", "chicken of the woods",
                "hen of the woods", "goat cheese", "goat's cheese", "goat milk", "goat's milk",
                "kidney bean", "kidney beans", "peanut butter", "butter lettuce", "duck sauce",
                "cauliflower steak", "lamb's lettuce", "hot dog bun", "hot dog buns",
                "hamburger bun", "hamburger buns", "sausage casing free"),
    modifiers=MEATLESS_MODIFIERS + ("beyond", "impossible"),
    adjacent=("soy", "tofu", "seitan", "tempeh", "jackfruit", "mushroom", "cauliflower", "lentil",
              "bean", "chickpea", "eggplant", "portobello", "walnut", "tvp"),
    tools=("tongue depressor", "tongue depressors"),
)

FISH = Category(
    "fish",
    terms=(
        "fish", "salmon", "smoked salmon", "tuna", "cod", "haddock", "halibut", "tilapia", "trout",
        "sardine", "anchovy", "anchovies", "anchovy paste", "mackerel", "herring", "swordfish",
        "catfish", "snapper", "sea bass", "branzino", "mahi mahi", "mahi-mahi", "mahi", "sole fillet",
        "flounder", "pollock", "perch", "pike", "carp", "eel", "caviar", "roe", "shrimp", "prawn",
        "crab", "crabmeat", "lobster", "crawfish", "crayfish", "langoustine", "scallop", "clam",
        "mussel", "oyster", "squid", "calamari", "octopus", "cuttlefish", "shellfish", "seafood",
        "surimi", "bonito", "katsuobushi", "dashi", "fish sauce", "nam pla", "worcestershire",
        "worcestershire sauce", "oyster sauce", "shrimp paste", "fish stock", "clam juice", "lox",
        "gravlax", "caesar dressing", "whitefish", "monkfish", "grouper", "barramundi", "bream",
        "fish fillet", "kipper",
    ),
    exceptions=("oyster mushroom", "oyster mushrooms", "oyster crackers", "oyster cracker",
                "crab apple", "crab apples", "crabapple", "kombu dashi", "fish-free", "fish free",
                "fish sauce substitute", "goldfish crackers"),
    modifiers=MEATLESS_MODIFIERS + ("fish-free", "fish free"),
    adjacent=("kombu", "shiitake", "seaweed", "jackfruit", "tofu", "mushroom", "kelp"),
    dish_terms=("caesar dressing",),
    # "fish slice" has no plural here: fish slices are food.
    tools=("fish slice", "crab cracker", "crab crackers", "lobster cracker", "lobster crackers"),
)

GELATIN = Category(
    "gelatin",
    terms=("gelatin", "gelatine", "jell-o", "jello", "isinglass", "marshmallow", "gummy bears",
           "aspic", "gelatin sheets"),
    modifiers=MEATLESS_MODIFIERS + ("gelatin-free", "gelatin free"),
    adjacent=("agar", "pectin"),
    exceptions=("agar agar", "agar-agar"),
)

HONEY = Category(
    "honey",
    terms=("honey", "beeswax", "royal jelly", "bee pollen", "honeycomb"),
    exceptions=("honeydew", "honeycrisp", "honey crisp", "honey locust", "honeynut squash"),
    modifiers=PLANT_MODIFIERS + ("bee-free", "bee free"),
)

ALCOHOL = Category(
    "alcohol",
    terms=(
        "wine", "red wine", "white wine", "rice wine", "cooking wine", "shaoxing", "beer", "ale",
        "lager", "stout", "pilsner", "ipa", "hard cider", "rum", "dark rum", "vodka", "gin",
        "whiskey", "whisky", "bourbon", "scotch", "brandy", "cognac", "armagnac", "tequila", "mezcal",
        "sake", "mirin", "sherry", "marsala", "port wine", "ruby port", "tawny port", "vermouth",
        "champagne", "prosecco", "liqueur", "schnapps", "kirsch", "grand marnier", "cointreau",
        "triple sec", "kahlua", "kahlúa", "amaretto", "frangelico", "baileys", "irish cream",
        "chartreuse", "absinthe", "ouzo", "sambuca", "limoncello", "calvados", "madeira", "soju",
        "pisco", "cachaca", "cachaça", "aperol", "campari", "alcohol", "liquor", "mead",
        "coffee liqueur", "orange liqueur", "spirits", "moscato", "riesling", "chardonnay",
        "sauvignon blanc", "pinot grigio", "pinot noir", "merlot", "cabernet", "rioja", "chianti",
        "bitters", "angostura", "drambuie", "crème de menthe", "creme de menthe", "crème de cassis",
        "creme de cacao", "crème de cacao",
    ),
    exceptions=("ginger ale", "root beer", "ginger beer", "wine vinegar", "red wine vinegar",
                "white wine vinegar", "rice wine vinegar", "sherry vinegar", "champagne vinegar",
                "scotch bonnet", "scotch egg", "scotch eggs", "butterscotch", "alcohol-free",
                "alcohol free", "non-alcoholic", "nonalcoholic", "rubbing alcohol", "sake lees",
                "rum extract", "brandy snaps", "port salut", "sweet vermouth substitute"),
    tools=("gin basket", "gin baskets", "wine cork", "wine corks"),
    modifiers=("non-alcoholic", "nonalcoholic", "alcohol-free", "alcohol free", "dealcoholized",
               "de-alcoholized", "zero-proof", "virgin"),
)

CATEGORIES = {c.name: c for c in (DAIRY, NUTS, EGG, MEAT, FISH, GELATIN, HONEY, ALCOHOL)}

# Which food categories each constraint forbids: vegan ⊇ vegetarian ⊇ fish-free.
CONSTRAINT_CATEGORIES: dict[str, tuple[str, ...]] = {
    "dairy-free": ("dairy",),
    "nut-free": ("nuts",),
    "egg-free": ("egg",),
    "fish-free": ("fish",),
    "vegetarian": ("meat", "fish", "gelatin"),
    "vegan": ("meat", "fish", "gelatin", "dairy", "egg", "honey"),
    "alcohol-free": ("alcohol",),
}

# Phrases right before a term that say the food is left out ("in place of peanuts").
NEGATIONS = ("instead of", "in place of", "rather than", "without", "omit", "omit the",
             "skip", "skip the", "equal to", "equivalent of", "equivalent to", "replaces", "replace the",
             "swap", "swap the", "free of", "resembles", "resemble", "resembling", "texture of",
             "similar to", "mimics", "mimic", "tastes like", "reminiscent of")

# Other names of one food, so a step's "mayo" refers back to an ingredient's "mayonnaise".
SYNONYMS = {"mayo": "mayonnaise", "yoghurt": "yogurt", "parmigiano": "parmesan",
            "parmigiano reggiano": "parmesan", "gelatine": "gelatin", "whisky": "whiskey",
            "omelet": "omelette", "pinenut": "pine nut", "prawn": "shrimp", "crabmeat": "crab",
            "worcestershire sauce": "worcestershire", "creme fraiche": "crème fraîche"}

# Ingredient-line words that make a mention harmless: the cook may leave it out, or is
# offered a compliant alternative ("beef broth (or water)", "butter or dairy-free spread").
OPTIONAL_MARKERS = ("optional", "if desired", "to serve, optional")
SAFE_ALTERNATIVES = ("water", "oil", "soy sauce", "tamari", "maple syrup", "agave", "olive oil", "vegetable oil", "tofu", "beans", "vegetable broth",
                     "vegetable stock", "margarine", "spread", "juice")

# Words in recipe titles and site tags that name a diet; the dish key drops them.
DIET_WORDS = ("vegan", "vegetarian", "veggie", "dairy-free", "dairy free", "nut-free", "nut free",
              "egg-free", "egg free", "eggless", "gluten-free", "gluten free", "alcohol-free",
              "non-alcoholic", "fish-free", "plant-based", "paleo", "keto", "whole30")
